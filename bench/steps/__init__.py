"""The benchmark's steps, a module each; ``bench/suite.py`` runs them in order."""
