package jcp

import "github.com/opensubstrate/sandbox/reject"

// The refusal codes of JCP/1 (docs/spec/jcp.md §9), beside the envelope's.
const (
	ChainDepth        = reject.ChainDepth
	BrokenChain       = reject.BrokenChain
	UntrustedRoot     = reject.UntrustedRoot
	WrongIssuer       = reject.WrongIssuer
	WrongAudience     = reject.WrongAudience
	DepthExhausted    = reject.DepthExhausted
	WidenDepth        = reject.WidenDepth
	WidenImages       = reject.WidenImages
	WidenCeiling      = reject.WidenCeiling
	WidenExpiry       = reject.WidenExpiry
	WidenModels       = reject.WidenModels
	WidenTiers        = reject.WidenTiers
	WidenHosts        = reject.WidenHosts
	WidenPaths        = reject.WidenPaths
	WidenRuns         = reject.WidenRuns
	WidenRate         = reject.WidenRate
	Expired           = reject.Expired
	NotYet            = reject.NotYet
	StaleInvocation   = reject.StaleInvocation
	Replay            = reject.Replay
	Revoked           = reject.Revoked
	ImageNotGranted   = reject.ImageNotGranted
	ModelNotGranted   = reject.ModelNotGranted
	TierNotGranted    = reject.TierNotGranted
	HostNotGranted    = reject.HostNotGranted
	PathNotGranted    = reject.PathNotGranted
	ClassNotGranted   = reject.ClassNotGranted
	CeilingUndeclared = reject.CeilingUndeclared
	OverCeiling       = reject.OverCeiling
	RunsExhausted     = reject.RunsExhausted
	RateExceeded      = reject.RateExceeded
	DoubleSpend       = reject.DoubleSpend
	AmendNotIssuer    = reject.AmendNotIssuer
	AmendWidens       = reject.AmendWidens
	AmendStale        = reject.AmendStale
)
