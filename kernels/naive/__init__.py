"""Slow, obviously-right references (fp64-capable) that every fast kernel is checked against."""
