"""What runs in a barrier task of the TF cluster's Spark stage (a Python worker on an executor): the cluster's
layout (roles, cluster spec, TF_CONFIG), the ports a node reserves, the TF process it starts and watches
(:mod:`~airflow_tfos.runtime.node.task`), and TensorBoard beside the chief. Never imports
:mod:`airflow_tfos.runtime.driver`."""
