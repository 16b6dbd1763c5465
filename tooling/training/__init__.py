"""Training and evaluating the turn generator: the corpora, the objectives, the resumable
training loop, distillation from the AR teacher, and the side-by-side evaluation of
``cadence train``, ``cadence distil`` and ``cadence eval-lm``."""
