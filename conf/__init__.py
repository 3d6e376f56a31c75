"""kraft-audit's built-in YAML, installed with the code as package data: ``defaults.yaml`` (every
setting, read by :mod:`lake.config`) and ``scenarios/*.yaml`` (the simulator's built-in scenarios).

A package (not a folder found relative to the source files) so that an installed wheel, a
``--py-files`` zip on a Spark cluster or an editable install all find them through
``importlib.resources.files("conf")``, without a checkout.
"""
