package approvalsvc

// RoutesToGuardian reports whether a review under policy with reviewer goes
// to the Guardian rather than to a human (SPEC §5 step 6): only when the
// reviewer is the Guardian and the policy is on-request or granular.
func RoutesToGuardian(policy ApprovalPolicy, reviewer string) bool {
	return reviewer == ReviewerGuardian && (policy.Kind == PolicyOnRequest || policy.Kind == PolicyGranular)
}
