"""0011: ``predictor_training_log.age_check``, the outcome of a training run's age check.

JSON of :meth:`memlane.predictor.age_check.AgeCheck.to_dict` (sessions on each side of the
time-ordered split, NDCG@10 with and without ``log_age_days``, whether the run masked age), or
NULL when the run had no age check (full stage, too few sessions, rows from before 0011).
"""

NAME = "0011_training_log_age_check"

SQL = """
ALTER TABLE predictor_training_log ADD COLUMN age_check TEXT;
"""
