set -u
export LD_LIBRARY_PATH=$PWD/.devcarry/lib
R=/usr/local/nvidia/lib64
W=/tmp/rgpu-probe; rm -rf $W; mkdir -p $W; cp -a . $W/src; chmod -R a+rX $W; cd $W/src
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
LD_LIBRARY_PATH=$R:$LD_LIBRARY_PATH _build/daemon/rgpud --open --listen 127.0.0.1:$PORT > $OUT/rgpud.log 2>&1 &
DP=$!
sleep 2
echo "== local"; timeout 200 python3 bench/train/train.py --models gpt,cnn --steps 20 --warmup 8 --label local 2>&1 | tail -5
for tp in tcp local; do
echo "== $tp"
RGPU_STATS=1 RGPU_TRANSPORT=$tp RGPU_SERVERS=127.0.0.1:$PORT/0 LD_LIBRARY_PATH=_build/client/.libs:$LD_LIBRARY_PATH timeout 200 python3 bench/train/train.py --models gpt,cnn --steps 20 --warmup 8 --label $tp 2>&1 | grep -v "export table" | tail -60
done
kill $DP
