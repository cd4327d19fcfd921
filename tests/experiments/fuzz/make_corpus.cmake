# Writes the seed corpus of fuzz_experiments (run by the CTest fixture fuzz_seed_corpus):
# CORPUS/seed gets a small attnsim dump and text inputs; CORPUS/work is libFuzzer's growing corpus.
file(MAKE_DIRECTORY ${CORPUS}/seed ${CORPUS}/work)
execute_process(COMMAND ${ATTNSIM_EXE} synth --synthetic "kbias:b=1,hq=2,hkv=1,nq=4,d=4,causal=1"
                        --out ${CORPUS}/seed/dump.h5 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "attnsim synth failed")
endif()
# Mode byte: 1 = method / grid / spec / checkpoint-record text, 3 = gate rules.
file(WRITE ${CORPUS}/seed/methods.txt "\x01golden,flash:qkv=bf16,p=bf16,out=bf16,bq=16,bk=32")
file(WRITE ${CORPUS}/seed/grid.txt "\x01bk=16,32,64")
file(WRITE ${CORPUS}/seed/spec.txt "\x01peaked:b=1,hq=2,hkv=1,nq=8,nkv=9,d=4,dv=2,causal=1,seed=3,sharp=4")
file(WRITE ${CORPUS}/seed/rules.txt "\x03key = [\"method\", \"seed\"]\n[rel_fro]\nrel = 1e-6\nbetter = \"lower\"\n[rmse]\nulp = 4\n")
