"""The ``siliconfriend`` command line: ``main`` builds the parser, one module per command group."""
