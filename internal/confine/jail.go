package confine

// MonitorJailArg is argv[1] of the helper that starts an S5 VM's monitor
// confined (RunMonitorJail): cmd/sandbox-s1, or any binary whose main
// calls s1init.Main first.
//
//	HELPER __sandbox-vm-jail FILTER WRITABLE... -- PROGRAM ARG...
const MonitorJailArg = "__sandbox-vm-jail"
