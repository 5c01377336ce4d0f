"""An argument parser whose one-dash long flags (KServe's ``-http_port``) match only exactly.

Reaches into the standard library's argparse: it overrides ``ArgumentParser._get_option_tuples``, the
private step that lists the flags an option string could abbreviate.

Why: KServe's docs spell flags with one dash. argparse reads a one-dash string as a possible prefix of
every one-dash flag, even with ``allow_abbrev=False``: a foreign short flag such as ``-m`` would set
``-model_name`` (or exit as ambiguous) instead of being left for ``parse_known_args`` to return.

Not switched off by ``KSERVE_SDK_INTERNALS=off``: no public argparse path behaves the same, and the
switch must not change what a command line means.
"""
import argparse


class ExactOneDashParser(argparse.ArgumentParser):
    """argparse's parser, except that a one-dash flag is never matched by a prefix of it."""

    def _get_option_tuples(self, option_string):
        return super()._get_option_tuples(option_string) if option_string.startswith("--") else []
