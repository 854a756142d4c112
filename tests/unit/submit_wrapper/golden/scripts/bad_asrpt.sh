#!/bin/bash
#ASRPT model=ok parallel=2x2 dp=3 colour=blue
#ASRPT llama iterations=-1 micro_batches=4
#ASRPT model="unterminated
srun true
