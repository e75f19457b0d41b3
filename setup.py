"""The one C extension (`laminar._native`, built with cffi); everything else
is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["laminar/native_build.py:ffi"])
