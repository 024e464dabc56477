"""Builds the C extensions (store/_native.c, broker/_kernel_sampler.c); everything else is in
pyproject.toml.

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
        ),
        Extension(
            "broker._kernel_sampler",
            sources=["broker/_kernel_sampler.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra",
                                "-Werror=implicit-function-declaration"],
        ),
    ]
)
