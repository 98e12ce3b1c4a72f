"""Tests of mechanisms/: calibration and error bars against closed forms, samplers against exact pmfs."""
