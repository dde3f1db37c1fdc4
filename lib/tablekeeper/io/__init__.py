"""Storage: FileIO over pyarrow.fs."""
