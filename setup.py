"""Builds the store's C extension, store/_native.c; everything else is in pyproject.toml.

(setup.py rather than pyproject's `[tool.setuptools.ext-modules]`, which setuptools still calls
experimental.)
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "store._native",
            sources=["store/_native.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra",
                                "-Werror=implicit-function-declaration"],
        )
    ]
)
