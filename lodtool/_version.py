"""lodtool's version, in one place: pyproject.toml reads it (``[tool.setuptools.dynamic]``), and so do
``lodtool.__version__``, ``lodtool --version`` and the ``lodtool_created_by`` attribute of every file
written, without the ~15 ms that ``importlib.metadata`` costs a start-up."""

__version__ = "0.2.0"
