"""The test suite's and the benchmarks' harness, kept out of the shipped package (the wheel and the
image carry only what the daemon and the demo need; tests/acceptance/test_wheel.py holds that line):
the real API server's launcher (``kubeapiserver``: etcd and kube-apiserver built by tools/kube/build),
the whole cluster's (``kubecluster``: that plus the controller manager, the scheduler and kwok), a real
node joined to it (``kubenode``: containerd and a kubelet, the machine put back at its stop), and the
outbox in memory on a clock a test moves by hand (``memstore``, ``clock``) for the tasks' unit tests,
the demo's fake API server with the tests' instruments (``fakekube``: faults, a request log, a control
API; ``fakekube_faults``), and PostgreSQL clusters with standbys, promotions and restarts (``postgres``).
The test suite finds it on pytest's ``pythonpath``; bench/suite.py puts tests/ on ``sys.path``."""
