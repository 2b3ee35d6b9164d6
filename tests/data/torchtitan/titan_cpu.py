"""Runs torchtitan 0.3.0's own entry point (torchtitan.train) on a machine without an accelerator,
for tests/data/torchtitan/record.sh. Its tools/utils.get_device_info() falls back to "cuda" when
torch finds no accelerator, and its DeviceMemoryMonitor asks the device module for a name,
properties and memory statistics that torch.cpu lacks: those are given here (the machine's RAM as
capacity). Nothing of torchtitan's model, optimizer or checkpointing is changed."""
import os
import runpy
import sys
import types

import torch
import torch._utils

torch._utils._get_available_device_type = lambda: "cpu"
torch.cpu.get_device_name = lambda device=None: "cpu"
torch.cpu.get_device_properties = lambda device=None: types.SimpleNamespace(
    total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
torch.cpu.memory_stats = lambda device=None: {}
torch.cpu.reset_peak_memory_stats = lambda device=None: None
torch.cpu.empty_cache = lambda: None
sys.argv[0] = "torchtitan.train"
runpy.run_module("torchtitan.train", run_name="__main__")
