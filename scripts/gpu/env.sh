# Sourced by the scripts/gpu/*.sh scripts, from the repository root: NVLink multicast off in this
# process and every child (the launcher passes the three on to every rank), the wheels in $WHEELS
# installed for the machine's Python when given (what it lacks: pydantic, pyyaml, networkx, z3-solver
# and their dependencies), and the repository on PYTHONPATH.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if [ -n "${WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/clockworks-site "$WHEELS"/*.whl || exit 2
    export PYTHONPATH=/tmp/clockworks-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
