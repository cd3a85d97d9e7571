"""The ``lodtool`` command line: argument parsing and rendering over the library."""
