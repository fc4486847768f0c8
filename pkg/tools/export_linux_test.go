package tools

// ForceLimitsInside makes runners created from now on have their tools set their own limits
// (see setLimitsInside), and returns the function that undoes it.
func ForceLimitsInside() func() {
	forceInside = true
	return func() { forceInside = false }
}

// FailLimitsInside makes every tool's attempt to set its own limits fail after the probe, as
// for a program the host cannot step, and returns the function that undoes it.
func FailLimitsInside() func() {
	failInside = true
	return func() { failInside = false }
}

// ScratchBaseName is the name of the folder holding the scratch folders of host process pid.
var ScratchBaseName = scratchBaseName
