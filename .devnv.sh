mv .devslim/_build _build; B=$PWD/_build; R=/usr/local/nvidia/lib64; export LD_LIBRARY_PATH=$PWD/.devcarry/lib
ls $R | grep -i nvidia-ml
LD_LIBRARY_PATH=$R:$LD_LIBRARY_PATH $B/daemon/rgpud --open --listen 127.0.0.1:7777 --log-level=debug >$OUT/rgpud.log 2>&1 &
sleep 2
echo "== local"; LD_LIBRARY_PATH=$R:$LD_LIBRARY_PATH python3 test/gpu/multi/nvlink_view.py
echo "== rgpu"; RGPU_SERVERS=127.0.0.1:7777/0,127.0.0.1:7777/1 LD_LIBRARY_PATH=$B/nvml/.libs:$B/client/.libs:$LD_LIBRARY_PATH python3 test/gpu/multi/nvlink_view.py
nvidia-smi topo -m; nvidia-smi nvlink -s | head -8
kill %1
