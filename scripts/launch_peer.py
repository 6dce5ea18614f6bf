"""The torchrun side of bench_launch.sh: join the job, one allreduce, a barrier, leave."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1000)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
dist.barrier()
dist.destroy_process_group()
