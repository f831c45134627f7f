"""Optimizers built only on the public strategy API (merge_call, batch_reduce_to, update)."""

from mwms_mpi.optimizers import schedules
from mwms_mpi.optimizers.adagrad import Adagrad
from mwms_mpi.optimizers.adam import Adam, AdamW
from mwms_mpi.optimizers.optimizer import Optimizer
from mwms_mpi.optimizers.rmsprop import RMSprop
from mwms_mpi.optimizers.sgd import SGD

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "Optimizer", "RMSprop", "schedules"]
