"""xgemm's tools, apart from the library core: the benchmark against cuBLAS (``bench``),
the practitioner's suites and the random and models samples (``suite``,
``generalisation``), what a call costs besides its kernel (``overhead``), the
memory-bound families' bandwidth (``bandwidth``), parameter sweeps and tuning
(``tuning``), the README's tables and figures (``report``, ``plots``) and the command
line (``cli``). ``import xgemm`` loads none of them; ``xgemm.sweep`` and ``xgemm.tune``
import ``tuning`` when first used.

Example:
    >>> from xgemm.tools import suite
    >>> "bfloat16" in suite.PARTS
    True
"""
