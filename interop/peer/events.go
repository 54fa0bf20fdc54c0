package peer

import "strings"

// EventNames are the canonical (PascalCase) NRI event/request names, in the
// order of their protocol enum values (1..14), followed by the non-event
// plugin requests.
var EventNames = []string{
	"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox",
	"CreateContainer", "PostCreateContainer", "StartContainer",
	"PostStartContainer", "UpdateContainer", "PostUpdateContainer",
	"StopContainer", "RemoveContainer", "UpdatePodSandbox",
	"PostUpdatePodSandbox", "ValidateContainerAdjustment",
}

// PluginRequestNames are requests a plugin can see that are not events.
var PluginRequestNames = []string{"Configure", "Synchronize", "Shutdown"}

// Norm lower-cases and strips '_', '-' and spaces.
func Norm(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer("_", "", "-", "", " ", "").Replace(s)
}

// Canon maps any spelling ("create_container", "createcontainer",
// "CreateContainer") of an event or plugin request to its canonical name,
// or "" if unknown.
func Canon(s string) string {
	n := Norm(s)
	for _, e := range EventNames {
		if Norm(e) == n {
			return e
		}
	}
	for _, e := range PluginRequestNames {
		if Norm(e) == n {
			return e
		}
	}
	return ""
}
