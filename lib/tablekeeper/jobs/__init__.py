"""Jobs: one module per job, each options -> plan -> execute -> result."""
