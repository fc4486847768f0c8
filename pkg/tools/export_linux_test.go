package tools

// FailSetupInside makes every tool's attempt to set itself up at its exec fail after the probe,
// as for a program the host cannot step, and returns the function that undoes it.
func FailSetupInside() func() {
	failInside = true
	return func() { failInside = false }
}

// ScratchBaseName is the name of the folder holding the scratch folders of host process pid.
var ScratchBaseName = scratchBaseName

// ScratchDir is the call's scratch folder as the host sees it.
func (c *Prepared) ScratchDir() string { return c.scratch }

// WithoutLandlock makes runners created from now on give calls no Landlock domain, as on a
// kernel without Landlock, and returns the function that undoes it.
func WithoutLandlock() func() {
	noLandlock = true
	return func() { noLandlock = false }
}

// NamespacesMade is how many mount namespaces this process has made for calls.
func NamespacesMade() int64 { return namespacesMade.Load() }

// ScratchDir is the process's scratch folder as the host sees it.
func (p *Process) ScratchDir() string { return p.prepared.scratch }
