"""Hooks: all I/O with Spark, YARN and HDFS happens here."""
