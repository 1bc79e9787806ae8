"""YAML tier policies shipped with tierload.

The folder is importable as ``tierload.configs`` so the embedded default travels with the
installed package; ``tierload policy show`` prints the effective result.
"""
