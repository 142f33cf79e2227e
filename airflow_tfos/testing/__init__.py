"""Protocol emulators of HDFS (WebHDFS) and YARN (ResourceManager REST), for tests of this package and of users' DAGs.

Written from the public Hadoop REST documentation; they speak the documented JSON shapes and fault
behaviours, not a real Hadoop. Servers listen on 127.0.0.1 unless given the address of a test host
(:mod:`airflow_tfos.testing.hosts`).
"""
