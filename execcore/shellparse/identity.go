package shellparse

// ApprovalShell is the shell part of the approval cache key (SPEC §6.3,
// second set of 2026-12-01; reference profile R3 §4.2): for a trusted
// bash-like wrapper, the shell exactly as given and its -c/-lc flag; for a
// trusted PowerShell wrapper, every word before the script. Two shells, or
// a login and a non-login run, execute the same script differently, so
// they never share one approval. It is nil for any other argv, whose
// canonical command keeps its program word anyway.
func ApprovalShell(argv []string, tr Trust) []string {
	if w, ok := ExtractWrapper(argv, tr); ok {
		return []string{w.Shell, w.Flag}
	}
	if _, ok := powerShellScript(argv, tr); ok {
		return append([]string(nil), argv[:len(argv)-1]...)
	}
	return nil
}
