"""lm-eval task YAMLs shipped with lm_eval_longctx (installed as the package ``lm_eval_longctx.task_configs``)."""
