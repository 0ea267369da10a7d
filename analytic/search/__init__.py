"""Layout search (:mod:`.layouts`), the programs it evaluates (:mod:`.programs`) and sweeps
(:mod:`.sweeps`)."""
