"""The learned recall ranker (docs/benchmarks.md, "Learned ranker"): features computed at recall time (features.py), a
LightGBM lambdarank model file with its feature schema (model.py, the shipped one in data/),
the recall stage (stage.py), training and leave-one-conversation-out evaluation from LoCoMo
(train.py, stores.py; locomo.py loads the dataset). See docs/benchmarks.md."""
