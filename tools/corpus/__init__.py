"""A corpus of real recorded hangs: random cases run on real torch, with their truth.

* :mod:`tools.corpus.spec`: what a case is made of, drawn from its seed;
* :mod:`tools.corpus.workload`, :mod:`tools.corpus.worker`: one rank of a case (torch);
* :mod:`tools.corpus.truth`: what the ranks' logs say happened, and the truth of a case;
* :mod:`tools.corpus.generate`: run cases and pack the kept ones (torch);
* :mod:`tools.corpus.check`: run the analyzer over the corpus and score it (no torch).
"""
