"""Other systems' gamma policies, re-implemented for the simulator as baselines.

Each is a :class:`~vllm_hust_vspec.adaptive.feedback.Controller` that
:func:`vllm_hust_vspec.sim.policies.make_controller` builds by name:

* :mod:`.reference` -- fixed gamma, vLLM's batch schedule, SGLang's EMA, Hugging Face's
  heuristic, plain UCB1;
* :mod:`.vllm_upstream` -- current vLLM's acceptance-adaptive K and DFlash adaptive K;
* :mod:`.per_batch` -- SGLang's per-batch-size EMA and a Nightjar-style bandit;
* :mod:`.pred_ucb` -- 0.14.3's online UCB controller;
* :mod:`.spec_rhythm` -- SpecRhythm's per-request TPOT-SLO budgets.
"""
