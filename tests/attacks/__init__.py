"""Attack tests: each numbered finding of issue 20, tried as the attacker (a package: their
module names repeat those of the feature tests)."""
