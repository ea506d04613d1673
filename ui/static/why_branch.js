// An event's js= (app.py's #why-branch click): the branch asked about is the one branch_why.js's chip set.
(index, ...rest) => [window.lookaheadWhyBranch ?? index, ...rest]
