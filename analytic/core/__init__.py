"""The notation and its numbers: units, symbols, values, Formula, numeric programs and their
lowering from sympy, the user's cache, errors and the choice lists."""
