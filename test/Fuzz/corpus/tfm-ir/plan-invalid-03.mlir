module attributes {tfm.plan = #tfm.plan<vpp = 2>} {}
