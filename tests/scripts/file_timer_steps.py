"""A worker written for torchrun's file-timer watchdog, unchanged: each step
is wrapped in torch.distributed.elastic.timer.expires. On the first attempt
rank 1's third step hangs; its timer expires and the launcher must kill it.
On the next attempt every step ends in time, and each rank writes
done.<rank>.<restart> into the folder given."""
import os
import sys
import time

import torch.distributed.elastic.timer as timer

out = sys.argv[1]
rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
for step in range(5):
    with timer.expires(after=2, scope="step"):
        if rank == 1 and restart == 0 and step == 2:
            time.sleep(600)  # the hang: only the watchdog ends it
with open(os.path.join(out, "done.%d.%d" % (rank, restart)), "w") as f:
    f.write("ok")
