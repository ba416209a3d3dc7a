"""What to change: the general fixes for each bad verdict, and what a DataLoader's settings leave unused."""

from __future__ import annotations

__all__: list[str] = []

DEFAULT_FIXES: dict[str, tuple[str, ...]] = {
    "input-bound": (
        "load batches in the background: DataLoader(num_workers>0, persistent_workers=True, "
        "prefetch_factor=2..4) or trainperf.data.prefetch(loader)",
        "pre-save decoded/augmented batches once with trainperf.data.presave() and train from "
        "trainperf.data.load_presaved()",
    ),
    "loop-bound": (
        "move per-step evaluation, logging and .item()/metric reads out of the step: do them every N steps",
        "time the loop's own work between optimizer.step() and the next batch (validation, checkpoints, "
        "printing): that is where this time goes",
    ),
    "host-bound": (
        "give the GPU more work per launch: a bigger batch (scale the learning rate with it)",
        "fuse the step's small kernels with torch.compile(model) (mode='reduce-overhead' also uses CUDA graphs)",
        "capture the whole step in a CUDA graph (torch.cuda.graphs) so the host launches it once",
    ),
    "cpu-contention": (
        "use fewer loader workers: the step's own threads need cores too (num_workers <= cores - torch threads)",
        "give the step fewer threads, torch.set_num_threads(cores - num_workers), so workers and step do not "
        "share cores",
        "pre-save decoded/augmented batches with trainperf.data.presave(): less CPU per batch for the workers",
    ),
    "padding": (
        "pack sequences: concatenate samples into full-length rows (with a mask or position ids that keep "
        "them apart) so no position is a pad",
        "bucket by length so each batch pads only to its own longest: a length-grouped sampler, or "
        "TrainingArguments(group_by_length=True) with the Hugging Face Trainer",
        "pad to the batch's longest, never to a fixed max_length: DataCollatorWithPadding(tokenizer, "
        "padding='longest', pad_to_multiple_of=8) keeps shapes friendly to tensor cores without more pads",
    ),
    "memory-growth": (
        "keep losses and metrics as numbers, not tensors: total += loss.item() (or loss.detach()); a tensor kept "
        "from each step keeps its autograd graph and what it saved",
        "look for what grows with every step: lists or dicts of outputs, caches keyed by batch, histories kept "
        "for logging; run evaluation under torch.no_grad() so its outputs hold no graph",
        "see what is alive and where it was allocated: torch.cuda.memory._record_memory_history() with "
        "torch.cuda.memory._dump_snapshot() on CUDA (https://pytorch.org/memory_viz reads it), tracemalloc for "
        "Python objects",
    ),
    "gc-bound": (
        "call gc.freeze() after building the model and data so long-lived objects leave the young generations",
        "raise the generation-0 threshold, e.g. gc.set_threshold(50_000, 50, 100)",
        "keep fewer Python objects per step (tensors instead of lists of floats, no per-step dicts)",
    ),
}


#: Fixes that apply only where the model trains on a CUDA device.
CUDA_FIXES: dict[str, tuple[str, ...]] = {
    "input-bound": ("on CUDA, DataLoader(pin_memory=True) with .to(device, non_blocking=True)",),
}


def dataloader_tips(
    *, num_workers: int, persistent_workers: bool, prefetch_factor: int | None, pin_memory: bool, cuda: bool
) -> list[str]:
    """The settings of one DataLoader that slow its loading down, each with the change to make.

    Args:
        num_workers: the loader's worker processes.
        persistent_workers: whether its workers survive between epochs.
        prefetch_factor: batches each worker loads ahead (``None`` without workers).
        pin_memory: whether batches are put in page-locked memory.
        cuda: whether training runs on a CUDA device.
    """
    tips: list[str] = []
    if num_workers == 0:
        tips.append("DataLoader has num_workers=0: load in worker processes, e.g. num_workers=4")
    else:
        if not persistent_workers:
            tips.append(
                f"DataLoader has num_workers={num_workers} without persistent_workers=True: workers restart every epoch"
            )
        if prefetch_factor is not None and prefetch_factor < 2:
            tips.append(f"DataLoader has prefetch_factor={prefetch_factor}: raise it to 2-4")
    if cuda and not pin_memory:
        tips.append(
            "DataLoader has pin_memory=False on a CUDA machine: set pin_memory=True and copy with "
            ".to(device, non_blocking=True)"
        )
    return tips
