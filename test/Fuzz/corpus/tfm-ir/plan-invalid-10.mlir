module attributes {tfm.plan = #tfm.plan<order = "tp-xx-dp-pp">} {}
