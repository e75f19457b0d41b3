"""The one C extension (`laminar.log._verify`, built with cffi); everything else
is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["laminar/log/verify_build.py:ffi"])
