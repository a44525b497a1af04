"""Build of the compiled encoders. Everything else about the package is in pyproject.toml.

Each extension is optional: with no C compiler the build goes on without it, and the package
runs on its Python code (the reference the compiled code is tested against), only slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("chakra_tools.core._hotloops", ["chakra_tools/core/_hotloops.c"], optional=True),
    Extension("chakra_tools.convert._hotloops", ["chakra_tools/convert/_hotloops.c"], optional=True),
    Extension("chakra_tools.replay._linkloop", ["chakra_tools/replay/_linkloop.c"], optional=True),
    Extension("chakra_tools.replay._kernel", ["chakra_tools/replay/_kernel.c"], optional=True),
])
