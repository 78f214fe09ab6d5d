"""onmt_train with two ranks on one GPU: the multi-GPU path run where one card is lent.

OpenNMT-py 3.5.1 (onmt/bin/train.py, onmt/utils/distributed.py) starts one process per entry
of gpu_ranks; process d calls torch.cuda.set_device(d), puts its batches on cuda:d and joins
init_process_group as rank gpu_ranks[d]. So gpu_ranks are global ranks, [0, 0] would make two
rank-0 processes, and a second process needs a second visible GPU. Here the ranks are 0 and 1
(world_size 2, gpu_ranks [0, 1]), the backend is gloo (NCCL refuses two ranks on one device),
and every process's device is cuda:0: set_device and the batches' device are mapped to it, and
the extension's preflight is told of two GPUs. Each rank still reads its own stripe of the
corpus (offset = d, stride = 2), as on two cards.

    python tools/two_ranks_one_gpu.py -config run.yaml    # plus any onmt_train options
"""
import sys

import torch


def on_the_one_gpu():
    set_device = torch.cuda.set_device
    torch.cuda.set_device = lambda device: set_device(0)
    torch.cuda.device_count = lambda: 2  # hooks/preflight.py checks gpu_ranks against the GPUs present
    import onmt.train_single as train_single

    build_iter = train_single.build_dynamic_dataset_iter

    def batches_on_the_one_gpu(*args, device_id=-1, **kwargs):
        return build_iter(*args, device_id=min(device_id, 0), **kwargs)

    train_single.build_dynamic_dataset_iter = batches_on_the_one_gpu


# At import, not under __main__: each rank is a spawned process that imports this file again
# (as __mp_main__) before it runs its part of the training.
on_the_one_gpu()

if __name__ == "__main__":
    from onmt.bin.train import main

    sys.argv = ["onmt_train", *sys.argv[1:], "-world_size", "2", "-gpu_ranks", "0", "1", "-gpu_backend", "gloo"]
    main()
