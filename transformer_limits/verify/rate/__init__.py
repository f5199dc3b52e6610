"""Rate claims and ``rate check`` on users' data: the claim grammar (:mod:`.claim_grammar`), claims
(:mod:`.claims`), reading the data (:mod:`.data`), the check (:mod:`.check`) and its figures
(:mod:`.plots`).  The public names are exported by :mod:`transformer_limits.verify`."""
