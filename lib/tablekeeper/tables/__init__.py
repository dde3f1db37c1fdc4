"""Tables as they stand in storage, read through FileIO: an Iceberg snapshot's manifests and
live files (``iceberg``), a Delta version replayed from its log (``delta``). Nothing here starts
an engine; a caller that wants a Delta log replayed on Spark passes the replay in."""
