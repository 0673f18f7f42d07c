module attributes {tfm.plan = #tfm.plan<order = "tp-cp-ep-pp-dp", tp = 2, cp = 2, dp = 4, pp = 2, vpp = 2, ep = 4, etp = 1, cp_comm_type = ["p2p", "a2a"]>} {}
