"""The ``analytic`` command: its parser and entry point (:mod:`.main`), its commands, flags, story
and plots."""
