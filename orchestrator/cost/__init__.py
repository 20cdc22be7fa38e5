"""The cost of a sweep before and after it runs, in one package: :mod:`.model` (predicted
seconds per trial and stage, calibrated on the results DB or modelled by the roofline, the
sweep's serial and wall time and GPU-hours), :mod:`.schedule` (the lock-contention schedule of
the trials on the free slots), :mod:`.fit` (per-stage seconds against work, OLS), :mod:`.report`
(predicted against measured, the dashboard section), :mod:`.view` (the CLI's tables). The
per-workload work counts live with the workloads (:mod:`workloads.trial_cost`)."""
