"""Which files a table reaches, lists and may delete, without Spark.

The pure rules the maintenance jobs decide by (how locations compare, what a listing hides, which
listed files no reference names), the reads both engines share (manifest lists and manifests),
the delete journal that makes destructive jobs survive a kill, and the driver engine that runs
small tables in this process. ``tablekeeper.spark`` runs the same reads on executors.
"""
