"""The built-in scheduling policies, one module each."""

from cadenza.scheduling.policies.cameo import CameoPolicy
from cadenza.scheduling.policies.edf import EdfPolicy
from cadenza.scheduling.policies.fair import FairPolicy
from cadenza.scheduling.policies.fifo import FifoPolicy
from cadenza.scheduling.policies.sjf import SjfPolicy

__all__ = ["CameoPolicy", "EdfPolicy", "FairPolicy", "FifoPolicy", "SjfPolicy"]
