module attributes {tfm.plan = #tfm.plan<cp = 2, cp_comm_type = ["ring"]>} {}
