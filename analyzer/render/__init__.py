"""Renderers: they read an :class:`analyzer.analysis.Analysis` and never recompute it."""
