"""Calibrating the simulator's NPU scenarios on measured Ascend runs.

What ``vllm-hust-vspec-sim calibrate-npu`` runs (docs/simulator.md):

* :mod:`.measurements` -- the measured runs shipped in ``sim/data/v014_npu``;
* :mod:`.simulate` -- one measured configuration as a scenario, and what its simulation records;
* :mod:`.fit` -- the acceptance and step-cost fits;
* :mod:`.scenarios` -- the calibrated scenarios (``sim/scenarios_npu``) and the record
  (``sim/data/npu_calibration.json``);
* :mod:`.trace` -- the same fit from a vSpec per-step trace;
* :mod:`.fair` -- target-only and both online algorithms on one host, under either reading of
  the data;
* :mod:`.explain` -- ablations and sensitivity runs on a calibration;
* :mod:`.family` -- the calibration family (costs between both readings of the data),
  hypothetical partial-graph hosts and unseen draws of both;
* :mod:`.robust` -- gamma controllers over the family against fixed gammas and the oracle
  (``vllm-hust-vspec-sim robust``).
"""
